// model rung
namespace lowbit {}
