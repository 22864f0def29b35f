"""Exercise 2: contract, probes, public and hidden checks."""
