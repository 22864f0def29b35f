"""The kit's own tests: `make test` (all), `make test-fast` (the quick tier)."""
