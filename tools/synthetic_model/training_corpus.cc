#include "tools/synthetic_model/training_corpus.h"

namespace colibri::synthetic {
namespace {

// Original text written for this project. Kept as separate literals: ISO C++
// only promises string literals of 64 KiB.
constexpr const char* kParagraphs[] = {
    // Birds.
    "Before sunrise the hedge behind the old school fills with small voices. A wren, "
    "hardly bigger than a walnut, throws out a song so loud that it seems to come from "
    "a much larger bird. Blackbirds answer from the chimneys, and a robin sings from the "
    "gate post as if it owned the whole lane. By the time the first bus rattles past, "
    "the chorus has thinned to a few scattered phrases, and the sparrows take over with "
    "their busy, quarrelsome chatter.",

    "Swallows arrive in April, tired and thin after crossing deserts and seas. They "
    "return to the same barn, sometimes to the same beam, and rebuild nests of mud "
    "pellets carried one beakful at a time. Nobody taught them the route. Young birds "
    "that have never made the journey leave in autumn without their parents and still "
    "find Africa, steering by the sun, the stars and perhaps the faint pull of the "
    "planet's magnetic field.",

    "Herons stand in the shallows like grey umbrellas folded against the wind. They can "
    "wait for twenty minutes without moving a feather, then strike so quickly that the "
    "fish never sees the bill. Gulls are the opposite: noisy, curious and endlessly "
    "inventive. One gull in the harbour has learned to drop mussels on the car park, "
    "cracking the shells open on the tarmac, while its neighbours simply steal chips "
    "from tourists.",

    "Owls hunt by ear as much as by eye. The feathers around an owl's face form a dish "
    "that gathers sound, and one ear sits slightly higher than the other, so the bird "
    "can judge height as well as direction. A barn owl flying over a meadow at dusk "
    "makes almost no noise at all; the soft fringes on its wing feathers break up the "
    "rushing air. Voles under the grass hear nothing until it is far too late.",

    "Counting birds is harder than it sounds. Flocks of starlings wheel over the reed "
    "beds in winter, thousands strong, folding and unfolding like smoke. Volunteers "
    "estimate them in blocks of a hundred, then multiply. Ducks on a lake are easier, "
    "because they mostly sit still, but they dive, drift behind islands and pop up "
    "somewhere else. A careful observer writes down the time, the weather and the "
    "number of people walking dogs along the shore.",

    // Weather.
    "The forecast promised a dry afternoon, but by three o'clock the sky over the hills "
    "had turned the colour of wet slate. Cumulus clouds that had floated all morning "
    "like cotton began to tower upward, their tops flattening into anvils where they "
    "met the cold air high above. The first drops were fat and warm. Then came hail, "
    "bouncing on the pavement, and a long roll of thunder that set every car alarm in "
    "the street singing.",

    "Fog forms on clear, still nights when the ground loses its heat to the open sky. "
    "The air just above the fields cools until it can no longer hold its moisture, and "
    "tiny droplets appear, too small to fall. In the valley the fog lies like milk in a "
    "bowl, while the hilltops stand in bright starlight. Drivers slow to a crawl, and "
    "sound carries strangely: a dog barking two farms away seems to be next door.",

    "Meteorologists describe the atmosphere with numbers: pressure in hectopascals, "
    "temperature in degrees, wind speed in metres per second, humidity as a percentage. "
    "A weather balloon released at noon climbs for about two hours, reaching thirty "
    "kilometres before it bursts. Its little radio reports every few seconds, and those "
    "readings, gathered from hundreds of stations, feed the models that predict "
    "tomorrow's rain.",

    "Winter arrived quietly this year. There was no great storm, only a week of frosts "
    "that grew a little harder each night. Puddles became glass, then white opaque "
    "discs that cracked underfoot. Icicles hung from the gutters, dripping at midday and "
    "growing again at dusk. When snow finally fell it was the dry, squeaking kind that "
    "refuses to make snowballs, and the children were disappointed.",

    "Wind is simply air moving from high pressure towards low, but the spinning Earth "
    "bends its path. In the northern hemisphere the flow curls clockwise around highs "
    "and anticlockwise around lows, which is why sailors once said that if you stand "
    "with your back to the wind, the low pressure lies on your left. Sea breezes are "
    "smaller cousins: on a hot day the land warms faster than the water, the air over "
    "the beach rises, and cooler air slides in from the sea.",

    // Computers.
    "A computer is, at bottom, a very fast and very obedient clerk. It fetches an "
    "instruction from memory, decodes it, performs a tiny operation such as adding two "
    "numbers or comparing a value with zero, and moves on to the next. Modern "
    "processors do billions of these steps every second, and they cheat cleverly: they "
    "guess which way a branch will go, start several instructions at once, and keep "
    "copies of recently used data close at hand in caches.",

    "Memory comes in layers. Registers hold a handful of values inside the processor "
    "itself. The first level of cache is small and quick, the second larger and "
    "slower, and main memory larger and slower again. Beyond that lie solid state "
    "drives and spinning disks, measured in terabytes but thousands of times more "
    "distant in time. Good programs arrange their data so that what is needed next is "
    "already nearby, because waiting for memory is the most common way to waste a "
    "fast machine.",

    "A compiler translates source code written by people into instructions the "
    "hardware understands. It reads the text, splits it into tokens, builds a tree "
    "that captures the structure of each expression, checks that the types agree, and "
    "then rewrites the program many times over, removing redundant work, keeping "
    "variables in registers and unrolling small loops. The output should behave "
    "exactly like the original, only faster. When it does not, somebody spends a long "
    "evening reading assembly.",

    "Networks move data in packets. A message is cut into pieces, each piece is "
    "labelled with where it came from and where it is going, and routers pass the "
    "pieces along from one link to the next. Some packets are lost, some arrive twice, "
    "some overtake others on the way. The protocols at each end number the pieces, ask "
    "again for missing ones and put everything back in order, so that a program sees a "
    "clean, reliable stream.",

    "Testing software is an exercise in humility. Every engineer believes the code they "
    "wrote this morning is correct, and every engineer has been surprised. A good test "
    "states one fact about the program, checks it automatically, and fails loudly when "
    "the fact stops being true. Tests that depend on the time of day, on the speed of "
    "the machine or on the order in which threads happen to run are worse than none: "
    "they teach people to ignore red lights.",

    "Random numbers inside a computer are usually not random at all. A generator starts "
    "from a seed and applies the same arithmetic again and again, producing a sequence "
    "that looks unpredictable but repeats exactly when the seed is the same. That is a "
    "feature. A simulation that misbehaves can be run again with the same seed, and "
    "the bug appears at the same step, ready to be examined under a magnifying glass.",

    // Rivers, mountains and the sea.
    "The river begins as a spring in a boggy hollow high on the moor, a trickle you "
    "could stop with your hand. Within a mile it has gathered a dozen other streams and "
    "is loud enough to drown conversation. It cuts through a gorge of dark rock, "
    "tumbles over a waterfall where dippers bob on the wet stones, and then slows as "
    "the valley widens, looping lazily through meadows towards the estuary and the "
    "grey, patient sea.",

    "Mountains are made and unmade slowly. Where continents collide the crust buckles "
    "upward, and for millions of years the peaks rise a few millimetres annually. At "
    "the same time frost splits the rocks, glaciers grind them, and rivers carry the "
    "fragments away as sand and silt. The jagged ridges we admire are only a moment in "
    "that long contest between uplift and erosion, and in another age they will be "
    "gentle hills.",

    "Ships once crossed the ocean guided by little more than a compass, a clock and the "
    "height of the sun at noon. The navigator measured the angle with a sextant, "
    "consulted tables printed in thick books, and marked the position on a chart with "
    "a pencil. An error of a few minutes on the clock could put a vessel miles from "
    "where its crew believed it to be, which is why accurate marine chronometers were "
    "once worth a fortune.",

    "At low tide the rock pools become small worlds. Anemones close into red jelly "
    "buttons, crabs hide under the weed, and tiny fish dart between the stones. A "
    "starfish moves so slowly that it seems to be painted on the rock, yet it is "
    "hunting, prising open a mussel with patient suction. When the water returns, the "
    "whole community opens again, waving tentacles and filtering the rich, cold sea.",

    // Kitchens and markets.
    "Bread asks for very little: flour, water, salt and time. The yeast feeds on sugars "
    "in the dough and breathes out tiny bubbles of gas, while kneading stretches the "
    "gluten into an elastic web that traps them. Left overnight in a cool kitchen, the "
    "dough develops a deeper flavour. In a hot oven the bubbles expand, the crust "
    "browns and crackles, and the smell drifts down the stairs and wakes everyone in "
    "the house.",

    "On Saturday mornings the market square is crowded with stalls. One sells apples "
    "in twelve varieties, each with a handwritten label, another sells cheese wrapped "
    "in waxed paper, a third offers hot coffee and doughnuts. Prices are chalked on "
    "boards: three pounds for a kilo of plums, two for a loaf, fifty pence for a bunch "
    "of parsley. By one o'clock the best tomatoes are gone and the traders are packing "
    "empty crates into their vans.",

    "Soup is the kitchen's way of wasting nothing. Onion skins, carrot ends and the "
    "bones from Sunday's roast simmer for hours with a bay leaf and a few peppercorns, "
    "and the broth that results is clear and golden. Add barley, lentils or beans, a "
    "handful of chopped greens and a squeeze of lemon, and a cold evening becomes "
    "bearable. Every family claims its own recipe is the original, and every family "
    "is right.",

    // Gardens and insects.
    "Bees visit flowers for nectar and pollen, and in doing so they carry pollen from "
    "one bloom to the next. A worker honeybee lives only a few weeks in summer, and "
    "she spends the last of them foraging, flying up to three kilometres from the "
    "hive. When she finds a rich patch of clover she returns and dances on the comb, "
    "her waggling run telling her sisters the direction and distance of the food.",

    "The garden changes its mind every month. In March it is mostly mud and the pale "
    "green spears of daffodils; in May it foams with blossom; by August the beans "
    "have climbed over the fence and the courgettes are growing faster than anyone can "
    "eat them. Slugs patrol the lettuce at night, blackbirds dig for worms in the "
    "compost, and a hedgehog snuffles along the path, grunting like a tiny pig.",

    "Ants organise themselves without a leader. Each worker follows simple rules: lay "
    "a scent trail when carrying food, follow trails that smell strong, wander when "
    "there is no trail at all. From those rules emerges a colony that finds the "
    "shortest route to a crumb, repairs its nest after rain and moves its eggs to "
    "safety when the ground floods. Engineers have borrowed the idea to route "
    "telephone calls and delivery vans.",

    // Trains, maps and libraries.
    "The night train leaves the capital at ten and reaches the coast by breakfast. In "
    "the narrow cabin the bunks fold down from the wall, the window blind rattles, and "
    "the wheels beat a steady rhythm over the joints in the rails. Somewhere after "
    "midnight the carriage jolts as engines are changed at a junction, voices call "
    "across the platform, and then the long smooth glide begins again through sleeping "
    "towns.",

    "A good map leaves things out. It shows the roads, the rivers and the contours of "
    "the hills, but not every tree, fence or puddle, because a map that showed "
    "everything would be as large as the land and just as confusing. The cartographer "
    "chooses a scale, one centimetre for every kilometre perhaps, and decides which "
    "features matter to the walker, the driver or the pilot who will unfold it.",

    "The library in our town occupies a stone building that was once a bank. The "
    "vault, with its heavy steel door propped permanently open, now holds the local "
    "history collection: parish records, faded photographs, maps of fields that "
    "became housing estates long ago. Researchers sit at the long tables under green "
    "lamps, turning pages carefully, and the only sounds are the hum of the heating "
    "and the occasional cough.",

    // The sky at night and music.
    "On a moonless night far from any city the sky is crowded with stars. The Milky "
    "Way stretches overhead like a faint luminous cloud, and with binoculars it "
    "dissolves into countless separate points. Planets give themselves away by not "
    "twinkling; Jupiter shines steadily, and its four largest moons line up beside it "
    "like beads on a thread. Meteors streak past every few minutes in August, bright "
    "grains of dust burning high in the atmosphere.",

    "Light from the nearest star beyond the sun takes more than four years to reach "
    "us, so we always see the sky as it was, never as it is. Astronomers measure "
    "distances in light years and parsecs, weigh galaxies by watching how fast they "
    "spin, and read the chemistry of remote suns in the dark lines of their spectra. "
    "It is remarkable that creatures who evolved to find fruit and avoid lions can "
    "work such things out at all.",

    "A piano is really a percussion instrument. Each key lifts a felt hammer that "
    "strikes a stretched steel string, and a damper falls back into place when the key "
    "is released. The lowest strings are wound with copper to make them heavy, the "
    "highest are short and thin, and the whole frame holds a tension of many tonnes. "
    "Tuning one takes an expert two hours, a tuning lever and a very good ear.",

    "The choir rehearses on Thursday evenings in the church hall. Sopranos sit by the "
    "window, altos beside them, tenors and basses at the back near the radiator. The "
    "conductor taps her pencil, hums a note, and they begin the difficult passage "
    "again, the one where the harmony shifts unexpectedly and half the tenors always "
    "come in early. After the tenth attempt it suddenly works, and everyone laughs "
    "with relief.",

    // Everyday numbers and conversation.
    "\"Can you meet me at the station at half past seven?\" she asked.\n"
    "\"I'll be there,\" he said, \"unless the bridge is closed again. Last week it took "
    "me forty minutes to get round by the ring road.\"\n"
    "\"Then leave early. We're catching the 7:52, and it won't wait for anybody.\"",

    "The recipe serves 4 people and takes about 35 minutes. You will need 250 grams of "
    "rice, 2 onions, 3 cloves of garlic, 1 litre of stock and 100 grams of grated "
    "cheese. In 2019 the village bakery sold 12,480 loaves; in 2020, when people baked "
    "at home, the number fell to 9,150. The bus timetable lists departures at 06:15, "
    "07:40, 09:05 and every 45 minutes after that until 23:30.",

    "Questions children ask: Why is the sky blue? Where does the wind go when it stops? "
    "How do fish sleep? Why can't we see the air? Do birds get cold feet? What happens "
    "to the puddles? Adults usually know part of the answer, and the honest ones admit "
    "the rest, which is the beginning of science.",

    // Workshops and towns.
    "In the workshop at the end of the yard a carpenter planes a length of oak. Curls "
    "of pale wood spill onto the floor and the air smells of resin and linseed oil. "
    "She checks the edge against a steel rule, marks the joints with a knife rather "
    "than a pencil, and cuts the tenons by hand because the machine, she says, never "
    "quite understands the grain. The finished table will outlast everyone in the room.",

    "The clock tower in the square has been running since 1873. Once a week a "
    "volunteer climbs the ninety steps, winds the weights back up to the top of their "
    "shafts, and oils the brass wheels. The mechanism gains about a second a day in "
    "summer and loses it again in winter, because the long pendulum grows and shrinks "
    "with the temperature. Nobody minds; the town has always run a little late.",

    "Bridges carry their loads in different ways. A stone arch presses outward and "
    "downward into its abutments, a suspension bridge hangs its deck from cables draped "
    "over tall towers, and a simple beam bends a little under each passing lorry. "
    "Engineers calculate the forces carefully, add a generous margin, and then watch "
    "for years with sensors that measure vibration, because wind and traffic can "
    "surprise even the best designs.",

    "Electricity reaches the house along a journey that begins at a power station or a "
    "wind farm many miles away. Transformers raise the voltage so that less energy is "
    "lost in the long cables, pylons carry the lines across the countryside, and "
    "substations step the voltage down again in stages. By the time it arrives at the "
    "kettle it has travelled further than most of the people waiting for their tea.",

    "Paper was once made from rags. Old linen shirts were soaked, beaten to a pulp and "
    "spread thinly on a fine mesh, then pressed and dried in sheets. Later mills used "
    "wood, which was cheaper but turned yellow and brittle with age. Archivists today "
    "spend much of their effort slowing that decay, keeping documents cool, dark and "
    "dry, and copying the most fragile ones before they crumble.",

    "Glass begins as sand, soda and lime heated until they melt together into a "
    "glowing liquid. A glassblower gathers a blob on the end of a hollow iron pipe, "
    "blows gently to make a bubble, and turns it constantly so that it does not sag. "
    "Shaping continues with wooden paddles, tweezers and wet newspaper folded into a "
    "pad. The piece cools overnight in an annealing oven, otherwise hidden stresses "
    "would shatter it.",

    "Every autumn the orchard produces more fruit than the family can use. They press "
    "some into juice, dry slices on racks above the stove, store the firmest apples in "
    "wooden trays in the cellar and give bags away to the neighbours. The windfalls go "
    "to the pigs and the wasps. By Christmas the cellar smells sweet and slightly "
    "fermented, and only the late keepers remain, wrinkled but still crisp inside.",

    "Lighthouses were built where ships were wrecked. Each has its own pattern of "
    "flashes so that sailors can tell one from another: two white flashes every ten "
    "seconds, perhaps, or a long red gleam followed by darkness. The keepers who once "
    "tended the lamps, trimmed wicks and polished lenses have been replaced by "
    "automatic systems, but the towers still stand on their headlands, striped and "
    "solitary, sweeping the night.",

    "Snails carry their houses with them and seal the doorway with a film of dried "
    "slime when the weather turns dry. After rain they emerge in astonishing numbers, "
    "gliding over walls and paths on a ribbon of mucus that lets them cross even a "
    "razor blade unharmed. Thrushes know where to find them and crack the shells on a "
    "favourite stone, leaving a scatter of broken fragments that naturalists call an "
    "anvil.",

    "The factory floor is quieter than it used to be. Robots weld car bodies inside "
    "cages of yellow mesh, sparks flying in bright showers, while a few technicians "
    "watch screens and walk the line with tablets. When a sensor reports a fault the "
    "whole section pauses, lights flash amber, and someone in overalls opens a panel, "
    "replaces a worn cable and restarts the sequence within minutes.",

    "Volcanoes are vents where molten rock from deep underground reaches the surface. "
    "Some erupt explosively, blasting ash high into the stratosphere, where it can cool "
    "the climate of the whole world for a year or two. Others pour out rivers of "
    "runny lava that advance slowly enough for people to walk away, though nothing "
    "stops them destroying roads, orchards and houses in their path. The soil they "
    "leave behind becomes wonderfully fertile.",

    "Language changes faster than most people notice. Words drift in meaning, spelling "
    "settles and unsettles, and new terms arrive with every invention: people once "
    "had no need to say download, spreadsheet or podcast. Dictionaries follow usage "
    "rather than command it, recording how words are actually used by speakers and "
    "writers, and adding a few hundred entries with every new edition.",
    // More topics, for a wider vocabulary.
    "Photography began with exposures so long that streets appeared empty: carriages "
    "and pedestrians moved too quickly to register, and only a man having his boots "
    "polished stood still enough to be recorded. Early plates were coated with silver "
    "compounds, developed over mercury vapour and fixed with salt. Today a telephone "
    "captures a sharper image in a thousandth of a second, adjusts its colours "
    "automatically and shares it before the subject has blinked.",

    "Chess rewards patience and punishes haste. A beginner grabs material, capturing a "
    "pawn here and a knight there, while an experienced opponent quietly develops "
    "bishops, castles early and seizes the open files with rooks. Grandmasters "
    "calculate variations many moves deep, but they also rely on intuition built from "
    "thousands of games, recognising familiar patterns the way a musician recognises "
    "a chord progression.",

    "Weaving interlaces two sets of threads at right angles. The warp is stretched "
    "lengthwise on the loom, the weft is passed across it with a shuttle, and the "
    "treadles lift different groups of warp threads to create twill, herringbone or "
    "elaborate damask. Wool, cotton, flax and silk each behave differently; linen is "
    "crisp and cool, silk slippery and lustrous, tweed rough and reassuringly warm.",

    "The postal service depends on addresses, and addresses depend on agreement. "
    "Somebody decided long ago that houses on one side of the street would carry odd "
    "numbers and those opposite even ones, that districts would have codes, and that "
    "letters would travel by sorting office, van, bicycle and finally a postman's "
    "satchel. Parcels labelled illegibly end up in a depot of mysteries, awaiting "
    "detective work.",

    "Doctors listen before they examine. A patient's account of when the pain started, "
    "what eases it and what worsens it often points towards the diagnosis more "
    "reliably than any scan. Then come the stethoscope, the thermometer, the blood "
    "pressure cuff and perhaps a sample sent to the laboratory. Good clinicians explain "
    "their reasoning plainly, admit uncertainty, and arrange to review progress after "
    "a sensible interval.",

    "Football on the common begins whenever enough children gather. Jumpers mark the "
    "goalposts, teams are picked by two captains taking turns, and the rules are "
    "negotiated loudly as play continues. Nobody keeps an accurate score, yet everyone "
    "remembers who won. When dusk falls and the ball becomes invisible, parents appear "
    "at the edge of the grass calling names, and the match dissolves into bicycles "
    "and arguments.",

    "Geologists read cliffs like the pages of a book. Layers of sandstone record "
    "ancient deserts, grey shales remember muddy lagoons, and bands of limestone "
    "packed with shells speak of warm shallow seas. Where the strata tilt, fold or "
    "break along faults, enormous pressures once squeezed them. Fossils of ammonites, "
    "trilobites and ferns help date each stratum, and volcanic ash layers provide "
    "precise radiometric ages.",

    "Maintaining an old bicycle is a pleasant puzzle. The chain needs cleaning and "
    "lubricating, the brake blocks wear thin, spokes loosen and wheels drift out of "
    "true. A puncture is repaired by levering off the tyre, finding the hole by "
    "submerging the inflated tube in a bucket, roughening the rubber, applying "
    "adhesive and pressing on a patch. Afterwards the rider feels curiously proud.",

    "Hospitals never sleep. Porters wheel trolleys along polished corridors, nurses "
    "hand over their patients at the change of shift, pharmacists check prescriptions "
    "and cleaners mop the wards before dawn. In the emergency department the triage "
    "nurse decides who must be seen immediately and who can wait, balancing a "
    "sprained ankle, a feverish toddler and an elderly gentleman with chest pains.",

    "Cartographers of the medieval period filled unknown regions with sea serpents, "
    "mermaids and fanciful kingdoms. Their charts were beautiful, expensive and often "
    "wildly inaccurate, yet sailors valued them because coastlines near harbours were "
    "drawn from genuine experience. Gradually surveys with chains, theodolites and "
    "triangulation replaced guesswork, and blank spaces shrank until satellites "
    "photographed every square metre.",

    "Beekeepers wear veils, gloves and pale overalls, and they move slowly. Smoke from "
    "a puffer calms the colony by masking alarm signals, and the keeper lifts each "
    "frame to inspect brood, stores and the queen's laying pattern. A healthy hive in "
    "midsummer may hold fifty thousand workers. Honey is harvested by slicing the wax "
    "cappings and spinning the combs in an extractor, then straining the golden syrup "
    "into jars.",

    "Mathematics often starts with play. Someone notices that adding consecutive odd "
    "numbers always produces a perfect square, or that a triangle's angles sum to a "
    "straight line, and wonders why. Proof turns curiosity into certainty: a chain of "
    "small, unarguable steps leading from agreed assumptions to a conclusion that "
    "must hold everywhere, forever, whatever the weather or the mood of the "
    "mathematician.",

    "Archaeologists excavate with trowels, brushes and enormous patience. Every layer "
    "of soil is recorded, photographed and drawn before it is removed, because digging "
    "destroys the evidence it uncovers. Pottery fragments, charred grain, animal bones "
    "and a lost bronze brooch gradually reveal how ordinary families cooked, traded, "
    "worshipped and buried their dead two thousand years ago.",

    "Fishing boats leave the harbour before daylight, diesel engines thudding, gulls "
    "following hopefully. Out beyond the headland the crew shoots the nets, hauls "
    "lobster pots marked with coloured buoys and sorts the catch into boxes of ice: "
    "mackerel, haddock, plaice, whiting and the occasional astonished monkfish. By "
    "afternoon the auction hall echoes with shouted bids and the scrape of crates.",

    "Chemistry happens in every kitchen. Baking soda releases carbon dioxide when it "
    "meets acidic buttermilk, caramel forms as sugar molecules break apart and "
    "recombine, and meat browns through reactions between amino acids and sugars. "
    "Vinegar dissolves the chalky scale inside a kettle, salt lowers the freezing "
    "point of water, and a splash of lemon keeps sliced apples from turning brown.",

    "Elephants remember waterholes across vast territories and lead their families "
    "there during droughts. The matriarch, usually the oldest female, guides the herd, "
    "settles disputes and recognises the calls of dozens of other elephants. They "
    "communicate with rumbles too deep for human ears, vibrations that travel through "
    "the ground for kilometres and are sensed through sensitive feet and trunks.",

    "Volunteers restore the canal each summer. They drain a stretch of water, rescue "
    "stranded fish and eels, pull out shopping trolleys and tyres, and repoint the "
    "crumbling brickwork of the locks with lime mortar. Oak gates, made to measure by "
    "a specialist joiner, are lowered into place by crane. When the water returns, "
    "narrowboats painted with roses and castles chug past at walking pace.",

    "Typography shapes how we read without our noticing. Serifs, the small strokes at "
    "the ends of letters, guide the eye along lines of printed text, while clean sans "
    "serif faces suit signs and screens. Designers adjust kerning between awkward "
    "pairs such as capital A and V, choose comfortable leading between lines, and "
    "avoid orphaned words stranded alone at the top of a column.",
};

std::string JoinParagraphs() {
  std::string text;
  for (const char* paragraph : kParagraphs) {
    if (!text.empty()) text += "\n\n";
    text += paragraph;
  }
  text += "\n";
  return text;
}

}  // namespace

const std::string& TrainingCorpus() {
  static const std::string* const corpus = new std::string(JoinParagraphs());
  return *corpus;
}

}  // namespace colibri::synthetic
