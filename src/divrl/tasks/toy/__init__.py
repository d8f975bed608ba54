"""Toy tasks for language models: the simulated idea-generation environment (the execution-rewards paper) in text
form."""
