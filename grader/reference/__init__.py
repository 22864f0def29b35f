"""The grader's own reference implementations and baselines (never the learner's copies)."""
