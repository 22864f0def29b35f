"""Exercise 1: contract, probes, public and hidden checks."""
