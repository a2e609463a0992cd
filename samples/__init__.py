"""Sample datasets generated at run time (installed as ``dstp.samples``)."""

from dstp.samples.generate import SIZES, ensure_samples, generate_samples

__all__ = ["SIZES", "ensure_samples", "generate_samples"]
