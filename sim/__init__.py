"""sim"""

__all__: list[str] = []
