"""Exercise 5: contract, probes, public and hidden checks."""
