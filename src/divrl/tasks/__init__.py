"""Task modules shipped with divrl: hypospace, molecules."""
