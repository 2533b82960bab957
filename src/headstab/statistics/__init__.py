"""Stability against chance, with uncertainty: prompt-group similarity and its null
(`prompt_groups`), the multi-bootstrap over refits and prompts (`bootstrap`), tests of differences
and equivalence (`hypothesis`), and how many refits a study needs (`seeds_needed`). Definitions and
assumptions: docs/statistics.md."""
