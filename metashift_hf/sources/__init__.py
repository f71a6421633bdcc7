"""Data in: downloads, the inputs manifest, the generated demo and COCO worlds, the published-statistics comparison."""
