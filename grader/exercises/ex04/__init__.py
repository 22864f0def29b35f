"""Exercise 4: contract, probes, public and hidden checks."""
