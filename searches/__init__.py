"""Search presets for cutlab-search (search=NAME; installed as cutlab.searches). Kept out of conf/: they are not
a config group of the app, which composes no search."""
