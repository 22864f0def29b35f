"""Exercise NN's hidden checks (instructor only): inputs the learner never sees."""
