"""Toy tasks for language models: the simulated idea-generation environment (seed 000) in text form."""
