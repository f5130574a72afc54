"""The face of the house: every command, the demo and the offline tools. The only
importer of ``sim/`` (the demo) and ``tui/``."""
