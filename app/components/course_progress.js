// The course's progress, kept in this browser (localStorage) and nowhere else: which exercises the
// learner answered right, with the seed they had. The server sends the records of this session's
// right answers; they are merged into what the browser holds, and the whole is sent back to be shown.

const STORE = "glassbox.course.progress";
const sentBy = new WeakMap(); // per mounted element: the progress it last sent (sent again only if it changes)

function stored() {
  try {
    const progress = JSON.parse(localStorage.getItem(STORE) || "{}");
    return progress && typeof progress === "object" && progress.lessons ? progress : { version: 1, lessons: {} };
  } catch {
    return { version: 1, lessons: {} }; // unreadable: start again rather than fail
  }
}

export default function (component) {
  const { data, parentElement, setStateValue } = component;
  const progress = data.clear ? { version: 1, lessons: {} } : stored();
  for (const record of data.records || []) {
    const lesson = (progress.lessons[record.lesson] ||= { done: {} });
    lesson.of = record.of;
    lesson.done[record.key] ||= { seed: record.seed, at: new Date().toISOString() };
  }
  const text = JSON.stringify(progress);
  try {
    localStorage.setItem(STORE, text);
  } catch {
    // storage refused (private mode, quota): the progress lives on in this page only
  }
  if (sentBy.get(parentElement) !== text) {
    sentBy.set(parentElement, text);
    setStateValue("progress", progress);
  }
}
