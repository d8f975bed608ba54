"""Analysis of training runs: the quality-diversity law fit (the quality-diversity paper) and training-curve plots."""
