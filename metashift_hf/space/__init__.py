"""The MetaShift Space (issue 35): a data layer over what is published (:mod:`.index` tasks, :mod:`.graphs`
meta-graphs, images and distances, :mod:`.results` leaderboards), its HTML (:mod:`.render`), the Gradio app
(:mod:`.app`) and the Space repo folder and its push (:mod:`.repo`)."""
