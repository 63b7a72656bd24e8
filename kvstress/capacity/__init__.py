"""Capacity planning: model cards (KV-cache geometry) and the block-pool sizing model."""

from kvstress.capacity._cards import ModelCard as ModelCard
from kvstress.capacity._cards import list_cards as list_cards
from kvstress.capacity._cards import load_card as load_card
from kvstress.capacity._cards import pool_for_model as pool_for_model
from kvstress.capacity._plan import CapacityPlan as CapacityPlan
from kvstress.capacity._plan import plan as plan
