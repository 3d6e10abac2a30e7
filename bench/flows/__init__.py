"""The flows the commands run: a sweep of levels, a capacity search, a tune, a report; and what they hand the
cost model."""
