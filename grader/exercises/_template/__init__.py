"""Exercise NN's grader folder: copy this folder to grader/exercises/exNN/ (see coursekit/lessons/README.md)."""
