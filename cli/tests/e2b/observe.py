"""What an operator of `dockhand serve` sees, through the E2B SDK and
Prometheus' own parser: a sandbox holding memory shows it in `get_metrics`
(a series), `/metrics` parses and counts what happened (a fenced sandbox's
request its policy refused included), and refuses a caller without a key.
Prints one JSON line."""

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request

from e2b import Sandbox
from prometheus_client.openmetrics.parser import text_string_to_metric_families

URL = os.environ["E2B_API_URL"]
KEY = os.environ["E2B_API_KEY"]
SECRET = os.environ["LOG_SECRET"]


def scrape(headers):
    request = urllib.request.Request(URL + "/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def samples(text):
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + json.dumps(s.labels, sort_keys=True)
            out[key] = s.value
    return out


def main():
    sbx = Sandbox.create(template="base", timeout=300, envs={"LOG_SECRET": SECRET})
    sbx.commands.run(
        "python3 -c \"import time; x = b'x' * (120 << 20); time.sleep(600)\"",
        background=True,
    )
    sbx.commands.run("echo hi")
    sbx.commands.run("head -c 20000000 /dev/urandom > /home/user/blob")
    # A query string may carry what is not the log's (a filter's value).
    query = urllib.parse.urlencode({"metadata": "tag=" + SECRET})
    listing = urllib.request.Request(URL + "/sandboxes?" + query, headers={"X-API-Key": KEY})
    with urllib.request.urlopen(listing, timeout=30) as r:
        filtered = json.loads(r.read())
    held = None
    series = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        series = sbx.get_metrics()
        if series and series[-1].mem_used >= 100 << 20 and series[-1].disk_used >= 20_000_000:
            held = series[-1]
            break
        time.sleep(1)
    # A sandbox behind an allow-list asks the egress gateway (its HTTP
    # proxy) for a host the list leaves out.
    fenced = Sandbox.create(template="base", timeout=300,
                            network={"allow_out": ["example.com"], "deny_out": ["0.0.0.0/0"]})
    denied = fenced.commands.run(
        "python3 -c \"import urllib.request\n"
        "try:\n urllib.request.urlopen('http://not-listed.example.net/', timeout=20)\n"
        "except Exception as e:\n print(getattr(e, 'code', e))\"").stdout.strip()
    # A window before the sandbox existed holds nothing.
    before = sbx.get_metrics(
        start=sbx.get_info().started_at.replace(year=2000),
        end=sbx.get_info().started_at.replace(year=2001),
    )

    status, kind, text = scrape({"X-API-Key": KEY})
    bearer_status, _, _ = scrape({"Authorization": "Bearer " + KEY})
    refused, _, refusal = scrape({})
    wrong, _, _ = scrape({"X-API-Key": "not-a-key-of-this-server"})
    parsed = samples(text)
    sbx.kill()
    fenced.kill()

    def value(name, **labels):
        return parsed.get(name + json.dumps(labels, sort_keys=True))

    print(json.dumps({
        "sandbox_id": sbx.sandbox_id,
        "envd_token": sbx._envd_access_token,
        "traffic_token": sbx.traffic_access_token,
        "filtered": len(filtered),
        "points": len(series),
        "mem_used": held.mem_used if held else None,
        "mem_total": held.mem_total if held else None,
        "cpu_count": held.cpu_count if held else None,
        "cpu_used_pct": held.cpu_used_pct if held else None,
        "disk_used": held.disk_used if held else None,
        "timestamps_rise": all(
            a.timestamp <= b.timestamp for a, b in zip(series, series[1:])
        ),
        "before_window": len(before),
        "status": status,
        "content_type": kind,
        "bearer_status": bearer_status,
        "refused": refused,
        "refusal": json.loads(refusal),
        "wrong_key": wrong,
        "running_base": value("dockhand_sandboxes", template="base", state="running"),
        "creates_base": value("dockhand_sandbox_creates_total", template="base"),
        "create_count": value("dockhand_sandbox_create_duration_seconds_count", template="base"),
        "create_requests": value(
            "dockhand_http_requests_total", method="POST", route="/v2/sandboxes", status="201"
        ),
        "latency_count": value(
            "dockhand_http_request_duration_seconds_count", method="POST", route="/v2/sandboxes"
        ),
        "pool_handovers": value("dockhand_pool_handovers_total", template="base"),
        "denied": denied,
        "egress_sandboxes": value("dockhand_egress_sandboxes"),
        "egress_connections": value("dockhand_egress_connections_total"),
        "egress_denied": value("dockhand_egress_requests_denied_total"),
        "egress_open": value("dockhand_egress_connections_open"),
        "families": sorted({k.split("{")[0] for k in parsed}),
        "secret_in_metrics": SECRET in text or KEY in text,
    }))


if __name__ == "__main__":
    main()
