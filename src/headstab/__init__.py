"""headstab: attention-head stability across independently seeded refits.

Reproduces Bali, Stanley, Suresh & Bzdok (2026), "Quantifying LLM Attention-Head Stability".
The library is pure functions over arrays; the Snakemake workflow in `workflow/` drives it.
"""

__version__ = "0.1.0"
