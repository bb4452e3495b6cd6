"""What the E2B SDK scripts share."""


def refused(call):
    """The exception a call raises (its class name), or None if it worked."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - which exception is what we report
        return type(e).__name__
    return None
