"""The TUI: a reader of the store (``ascend-doctor tui``). Import ``ascend_doctor.tui.app``
for the application; this package itself imports nothing of Textual."""

__all__: list[str] = []
