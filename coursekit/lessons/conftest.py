"""pytest set-up for the lessons' own tests (``<topic>/test_lesson.py``): the CPU smoke profile, whatever the
machine, and the repository's compile cache, as for ``tests/``."""

from coursekit.cache import use_repo_compile_cache
from coursekit.profile import use_smoke_profile_for_tests

use_smoke_profile_for_tests()
use_repo_compile_cache()

collect_ignore = ["_template"]  # tests/test_lessons.py runs the template's tests in a throwaway copy
