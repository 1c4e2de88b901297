"""The machine-peak probes (C sources): fp32 FMA throughput (fma_peak.c) and STREAM triad
bandwidth (triad.c), run by `catenc profile` (catenc/profile.py) and `make bench`."""
