"""wavefuse: fusion passes, an AMD GPU simulator and a HIP code generator."""
__version__ = "0.1.0"
