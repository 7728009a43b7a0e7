"""The report: the result document every reader shares, the speed against the floor, and how
the document is rendered for a terminal."""
