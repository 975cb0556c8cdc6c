"""Tests of the applications."""
