"""The context ontologies of MetaShift (the original code's lists, as published)."""

from __future__ import annotations


# General contexts: GQA's `location`/`weather` fields plus place/room words that appear as object
# names. The paper's appendix lists 'snow' where the code has 'sea'; we follow the code.
GENERAL_CONTEXT_ONTOLOGY: dict[str, tuple[str, ...]] = {
    "location": ("indoors", "outdoors"),
    "weather": ("clear", "overcast", "cloudless", "cloudy", "sunny", "foggy", "rainy"),
    "room": ("bedroom", "kitchen", "bathroom", "living room"),
    "place": (
        "road",
        "sidewalk",
        "field",
        "beach",
        "park",
        "grass",
        "farm",
        "ocean",
        "pavement",
        "lake",
        "street",
        "train station",
        "hotel room",
        "church",
        "restaurant",
        "forest",
        "path",
        "display",
        "store",
        "river",
        "sea",
        "yard",
        "airport",
        "parking lot",
    ),
}

# The 27-category attribute ontology. 'dark' and 'short' sit in two categories; the published
# attribute subsets file them under the later one ('dark' -> color, 'short' -> length), which
# is what the dict below does by letting later categories overwrite earlier ones.
ATTRIBUTE_CONTEXT_ONTOLOGY: dict[str, tuple[str, ...]] = {
    "darkness": ("dark", "bright"),
    "dryness": ("wet", "dry"),
    "colorful": ("colorful", "shiny"),
    "leaf": ("leafy", "bare"),
    "emotion": ("happy", "calm"),
    "sports": ("baseball", "tennis"),
    "flatness": ("flat", "curved"),
    "lightness": ("light", "heavy"),
    "gender": ("male", "female"),
    "width": ("wide", "narrow"),
    "depth": ("deep", "shallow"),
    "hardness": ("hard", "soft"),
    "cleanliness": ("clean", "dirty"),
    "switch": ("on", "off"),
    "thickness": ("thin", "thick"),
    "openness": ("open", "closed"),
    "height": ("tall", "short"),
    "length": ("long", "short"),
    "fullness": ("full", "empty"),
    "age": ("young", "old"),
    "size": ("large", "small"),
    "pattern": ("checkered", "striped", "dress", "dotted"),
    "shape": ("round", "rectangular", "triangular", "square"),
    "activity": (
        "waiting",
        "staring",
        "drinking",
        "playing",
        "eating",
        "cooking",
        "resting",
        "sleeping",
        "posing",
        "talking",
        "looking down",
        "looking up",
        "driving",
        "reading",
        "brushing teeth",
        "flying",
        "surfing",
        "skiing",
        "hanging",
    ),
    "pose": (
        "walking",
        "standing",
        "lying",
        "sitting",
        "running",
        "jumping",
        "crouching",
        "bending",
        "smiling",
        "grazing",
    ),
    "material": (
        "wood",
        "plastic",
        "metal",
        "glass",
        "leather",
        "porcelain",
        "concrete",
        "paper",
        "stone",
        "brick",
    ),
    "color": (
        "white",
        "red",
        "black",
        "green",
        "silver",
        "gold",
        "khaki",
        "gray",
        "dark",
        "pink",
        "dark blue",
        "dark brown",
        "blue",
        "yellow",
        "tan",
        "brown",
        "orange",
        "purple",
        "beige",
        "blond",
        "brunette",
        "maroon",
        "light blue",
        "light brown",
    ),
}

ATTRIBUTE_CATEGORY: dict[str, str] = {
    word: category for category, words in ATTRIBUTE_CONTEXT_ONTOLOGY.items() for word in words
}
GENERAL_CATEGORY: dict[str, str] = {
    word: category for category, words in GENERAL_CONTEXT_ONTOLOGY.items() for word in words
}
# Place/room words that are GQA object names: the scene-graph build turns them into general
# contexts ('ocean(dog)'). The published keys never use them as object contexts ('dog(ocean)'),
# except 'grass', which they use both ways (44 'x(grass)' keys, e.g. the paper's cat(grass)).
SCENE_WORDS = frozenset(GENERAL_CONTEXT_ONTOLOGY["room"] + GENERAL_CONTEXT_ONTOLOGY["place"])
SCENE_WORDS_ALSO_OBJECT_CONTEXTS = frozenset({"grass"})
