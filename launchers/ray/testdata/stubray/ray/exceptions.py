class GetTimeoutError(Exception):
    pass
