"""Build tier: the wheel, the sdist, the engine-only library and the C++ engine
unit test, each built here from this tree."""
