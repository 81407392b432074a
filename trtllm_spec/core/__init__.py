"""Pure data: schemas, recipe, model shapes, hardware. No torch here."""
