# A 50-line orchestration snippet of the kind a model writes: the figure
# for type checking is measured on it.
from dataclasses import dataclass


@dataclass
class Order:
    id: int
    amount: float
    region: str


def parse(raw: dict) -> Order:
    return Order(id=int(raw["id"]), amount=float(raw["amount"]), region=str(raw["region"]))


def bucket(amount: float) -> str:
    if amount < 10:
        return "small"
    if amount < 100:
        return "medium"
    return "large"


raw_orders = [{"id": i, "amount": i * 7.5, "region": ["eu", "us", "ap"][i % 3]} for i in range(30)]
orders = [parse(r) for r in raw_orders]
totals: dict[str, float] = {}
counts: dict[str, int] = {}
for order in orders:
    totals[order.region] = totals.get(order.region, 0.0) + order.amount
    counts[bucket(order.amount)] = counts.get(bucket(order.amount), 0) + 1

checked = await noop(len(orders))
regions = sorted(totals)
summaries = []
for region in regions:
    share = totals[region] / sum(totals.values())
    summaries.append(f"{region}: {totals[region]:.1f} ({share:.0%})")

largest = max(orders, key=lambda o: o.amount)
smallest = min(orders, key=lambda o: o.amount)
spread = largest.amount - smallest.amount
report = {
    "orders": checked,
    "regions": summaries,
    "buckets": counts,
    "spread": round(spread, 2),
}
print("\n".join(summaries))
report
