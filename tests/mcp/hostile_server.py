"""An MCP server that misbehaves on request, for code mode's hostile tests:
it hangs, dies, or floods its answer."""

import asyncio
import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("hostile")


@server.tool()
def hang(seconds: float) -> str:
    """Sleeps, holding up the whole server."""
    time.sleep(seconds)
    return "woke"


@server.tool()
def crash() -> str:
    """Ends the server's process at once."""
    os._exit(3)


@server.tool()
def flood(megabytes: int) -> str:
    """Returns that many megabytes of text."""
    return "x" * (megabytes << 20)


@server.tool()
def echo(text: str, times: int = 1) -> str:
    """Returns text repeated."""
    return text * times


if __name__ == "__main__":
    # `--http PORT` serves streamable HTTP on 127.0.0.1:PORT/mcp instead.
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        asyncio.run(server.run_streamable_http_async(host="127.0.0.1", port=port))
    else:
        asyncio.run(server.run_stdio_async())
