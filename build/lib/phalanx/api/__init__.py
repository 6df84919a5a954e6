"""Phalanx's API: the CRD models and the gang intent a Job carries."""
