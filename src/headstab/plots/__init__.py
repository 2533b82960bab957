"""Figures of the workflow: seaborn/matplotlib, rendered to files with the Agg backend."""
