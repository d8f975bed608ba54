"""Analysis of training runs: the quality-diversity law fit (seed 002) and training-curve plots."""
