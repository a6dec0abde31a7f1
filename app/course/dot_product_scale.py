from app.components.course import lesson_end, lesson_page
from model.course import LESSONS

lesson_end(lesson_page(next(x.slug for x in LESSONS if x.module == "dot_product_scale")))
