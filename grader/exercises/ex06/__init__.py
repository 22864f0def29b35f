"""Exercise 6: contract, probes, public and hidden checks."""
