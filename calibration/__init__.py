"""What the reader must know about the physical world: templates, palettes, the renderer."""

from calibration.template import (  # noqa: F401
    PENCIL_COLOURS, PENCIL_MARKS, Template, Region, Shape, Marker,
    get_template, template_ids, all_templates, load_template_file, validate_template_dict,
)
