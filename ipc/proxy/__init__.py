"""`compactd proxy`: an HTTP proxy between an agent and its model provider (OpenAI Chat Completions
and Anthropic Messages) that attaches each conversation to the daemon as one agent and puts ready
digests into later requests. Rules: docs/PROXY.md. Needs the ``compactd[proxy]`` extra (aiohttp,
msgspec); ``import ipc`` never imports this package.

    async with Proxy(ProxySettings(listen=("127.0.0.1", 8787), upstream="https://api.anthropic.com")):
        ...
"""
