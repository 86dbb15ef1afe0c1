"""What every operation's declaration (`ops/<operation>/declaration.py`) is made of: the front door (`door`), the
casts and device guard (`common`), the modules' parameter helpers (`parts`) and the registry's record types
(`declaration`). No module here imports an operation."""
