"""Exercise 0: contract, probes, public and hidden checks."""
