"""The course's autograder.

Front ends: ``python -m grader PATH`` (CLI), ``pytest grader --submission PATH``
and ``grader.notebook.run_check`` in nbgrader autograde cells.  All three run
the checks registered in ``grader.registry``; submissions are read only
through ``grader.interface``.
"""
