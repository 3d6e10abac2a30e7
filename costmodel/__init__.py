"""The decision: from measured levels, a traffic profile and dated prices to the cost of self-hosting and
of paying per token, and the crossover between them (COSTMODEL.md).

Pure: no I/O except `costmodel.prices` reading its own YAML catalogs (and a user's price file).

    prices.py       price catalogs (GPU-hour, per-token), validated, dated
    inputs.py       the scenario's traffic / pricing / requirements sections
    model.py        per level: cost per request and per 1M tokens, the operating point
    fleet.py        fleet size, monthly cost, crossover volume
    sensitivity.py  one assumption at a time
    verdict.py      the answer in words
    subject.py      what is priced, and what was measured instead (the verdict's first line then)
    decide.py       all of it for one or more engines: `decide(...) -> Decision`
"""
