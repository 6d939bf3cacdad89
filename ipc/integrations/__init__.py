"""Drop-in integrations of compactd into agent frameworks (docs/INTEGRATIONS.md).

Each module imports only ``ipc`` and its own framework, which is an optional extra
(``pip install compactd[langchain]`` ...); ``import ipc`` never imports them.
"""
