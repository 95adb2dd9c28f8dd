"""Parallel tier: files run on 2 and 3 real processes under the launcher
(ranks/), and the tests that start them."""
