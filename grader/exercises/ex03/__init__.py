"""Exercise 3: contract, probes, public and hidden checks."""
