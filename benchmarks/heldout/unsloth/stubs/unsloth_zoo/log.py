import logging

logger = logging.getLogger("unsloth_zoo")
