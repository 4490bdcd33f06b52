"""kiln: turn racks of bare-metal GPU servers into a validated Slurm GPU cluster."""

__version__ = "0.1.0"
