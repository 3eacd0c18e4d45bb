"""Every test here runs on both translation cores (see :mod:`tests.support.cores`)."""

from tests.support.cores import translation_core

__all__ = ["translation_core"]
