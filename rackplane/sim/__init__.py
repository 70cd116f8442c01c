"""Capacity model, failure model, traces and the discrete-event simulator. Pure: virtual time."""
