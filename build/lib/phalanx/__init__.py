"""Phalanx: all-or-nothing (gang) scheduling for Kubernetes Jobs on any stock cluster."""

__version__ = "0.1.0"
