"""One run: build its task, train it with a step recorder, evaluate it, and write its record."""
