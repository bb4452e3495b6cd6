"""An MCP server with 50 tools, for code mode's module tests: an
inventory of 10 warehouses, each with five operations. Every tool answers
from data computed here, so a test can check each value."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("inventory")

WAREHOUSES = [
    "amsterdam", "berlin", "chicago", "denver", "essen",
    "fresno", "geneva", "houston", "izmir", "jakarta",
]


def stock(warehouse: str, item: str) -> int:
    # A fixed, checkable number per (warehouse, item).
    return (sum(map(ord, warehouse + ":" + item)) * 7) % 1000


def register(warehouse: str) -> None:
    @server.tool(name=f"{warehouse}_stock", description=f"Units of an item in stock in the {warehouse.title()} warehouse.")
    def count(item: str) -> int:
        return stock(warehouse, item)

    @server.tool(name=f"{warehouse}_reserve", description=f"Reserves units of an item in {warehouse.title()}; returns the units left.")
    def reserve(item: str, units: int) -> int:
        return stock(warehouse, item) - units

    @server.tool(name=f"{warehouse}_address", description=f"The street address of the {warehouse.title()} warehouse.")
    def address() -> str:
        return f"1 Dock Street, {warehouse.title()}"

    @server.tool(name=f"{warehouse}_items", description=f"Items the {warehouse.title()} warehouse carries.")
    def items() -> list[str]:
        return [f"{warehouse[:3]}-{n}" for n in range(3)]

    @server.tool(name=f"{warehouse}_open", description=f"Whether the {warehouse.title()} warehouse is open on a weekday (0 = Monday).")
    def is_open(weekday: int) -> bool:
        return weekday < 5


for w in WAREHOUSES:
    register(w)


if __name__ == "__main__":
    server.run()
