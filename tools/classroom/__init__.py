"""The course as an nbgrader course directory: release, collect, autograde, feedback, export.

    python -m tools.classroom release              # course/release/exNN/ + course/tcip-learner-kit.zip
    python -m tools.classroom collect DIR          # DIR/<student>/**/NN_*.ipynb -> course/submitted/
    python -m tools.classroom autograde [--jobs N] # hidden checks put back; grades into the gradebook
    python -m tools.classroom feedback             # course/feedback/<student>/...: per-check HTML pages
    python -m tools.classroom export               # course/grades.csv and course/grades_by_check.csv

``--course PATH`` (default ``course/``, or ``$COURSE``) is an ordinary nbgrader course
directory; ``course/nbgrader_config.py`` is written on first use and is yours to edit
afterwards.  The gradebook is SQLite (``course/gradebook.db``) unless ``GRADEBOOK_URL``
(any SQLAlchemy URL) or the config file says otherwise.

The learner kit is built from an explicit allow-list: ``coursekit/``, the grader's public
modules (each exercise's contract, probes, public checks and stored fixtures), the released
exercises, the lessons and the requirements. Solutions, hidden checks, reference
implementations, thresholds, calibration files and instructor tools never ship, and the kit
is scanned before it is zipped: for solution code, hidden-test markers, hidden check code,
and any module that defines an exercise's interface names or a reference function.

``autograde`` grades through the same isolated runner as ``python -m grader`` (the notebooks
are never executed) and refuses to run without the sandbox unless ``--unsandboxed`` is given.

One module per command (``release``, ``collect``, ``autograde``, ``feedback``, ``export``; ``__main__`` parses the
command line), and what they share: ``course`` (the folder, its nbgrader configuration and gradebook, nbgrader run
in it), ``learners`` (learner ids nbgrader can take, submissions autograde refused), ``records`` (each check's
record read back), and the learner kit's ``kit_contents`` (the allow-list), ``kit_scan`` and ``kit_templates``.
"""
