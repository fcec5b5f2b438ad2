"""The questions of the LongMemEval-shaped evaluation (bench/lcm_memory_eval.py), by type.

LongMemEval (Wu et al., 2024) asks about one user's long multi-session history; its data
cannot be downloaded here, so this set is written in its shape: the same question types, each
question paraphrasing its evidence (few shared words), evidence planted in dated sessions
among chatter and near-topic distractors. Each entry: the question and its evidence, as
``(day, role, text)`` with ``day`` counted from the history's first session (0-119).

- ``single-session-user``: one fact the user told once.
- ``single-session-assistant``: one thing the assistant said.
- ``multi-session``: an aggregate over three sessions (all three are needed).
- ``temporal-reasoning``: which of two dated events came first, or when (both are needed).
- ``knowledge-update``: a fact, then its newer value in a later session; the newer must win.
- ``abstention``: a question near the history's topics that it never answers (no evidence).
"""

from __future__ import annotations

Evidence = tuple[int, str, str]  # (day, role, text)
Question = tuple[str, list[Evidence]]

SINGLE_USER: list[Question] = [
    (
        "What breed is the puppy I brought home?",
        [(12, "user", "We finally got the corgi from the breeder on Saturday, she's tiny.")],
    ),
    (
        "Which instrument have I been learning?",
        [(30, "user", "My cello teacher says my bowing improved a lot this month.")],
    ),
    (
        "Where did I grow up?",
        [(44, "user", "Back in Tromsø, where I spent my childhood, the winters were endless.")],
    ),
    (
        "What's my blood type?",
        [(51, "user", "The clinic confirmed I'm O negative, so I can donate to anyone.")],
    ),
    (
        "What kind of car do I drive?",
        [(63, "user", "My old Volvo estate needs new brake pads again.")],
    ),
    (
        "What is my daughter allergic to?",
        [(7, "user", "Mia reacted badly to peanuts at the party, her face swelled up.")],
    ),
    (
        "Which language am I studying on the side?",
        [(88, "user", "Practising Korean verb endings on the bus every morning now.")],
    ),
    (
        "How tall is the fence we plan to build?",
        [
            (
                95,
                "user",
                "The contractor quoted us for a 1.8 metre wooden barrier around the garden.",
            )
        ],
    ),
    (
        "What did I name my sourdough starter?",
        [(104, "user", "Gerald, my bread yeast culture, doubled overnight again.")],
    ),
    (
        "Which team do I support?",
        [(115, "user", "Can't believe Celtic lost the derby, worst match of the season.")],
    ),
    (
        "Where do I keep the boat?",
        [(22, "user", "The sailboat stays at the marina in Howth over the winter.")],
    ),
    (
        "What's the name of my therapist?",
        [(71, "user", "Dr. Okafor suggested I keep a mood journal between our sessions.")],
    ),
]

SINGLE_ASSISTANT: list[Question] = [
    (
        "Which restaurant did you suggest for the anniversary?",
        [
            (
                15,
                "assistant",
                "For a quiet anniversary, Le Petit Jardin on Rue Cler has a lovely courtyard.",
            )
        ],
    ),
    (
        "What stretch did you recommend for my back?",
        [
            (
                27,
                "assistant",
                "Try the cat-cow pose each morning; it loosens the lumbar spine gently.",
            )
        ],
    ),
    (
        "Which book did you tell me to read about habits?",
        [
            (
                38,
                "assistant",
                "Atomic Habits by James Clear is a practical place to start on routines.",
            )
        ],
    ),
    (
        "What temperature did you say to roast the chicken at?",
        [
            (
                46,
                "assistant",
                "Roast the bird at 200 degrees Celsius for about an hour and twenty minutes.",
            )
        ],
    ),
    (
        "Which hiking trail did you propose near Zermatt?",
        [
            (
                58,
                "assistant",
                "The Five Lakes Walk above Zermatt gives the best Matterhorn reflections.",
            )
        ],
    ),
    (
        "What did you say the visa processing time was?",
        [
            (
                66,
                "assistant",
                "Schengen applications usually take about fifteen calendar days to decide.",
            )
        ],
    ),
    (
        "Which plant did you say survives low light?",
        [
            (
                79,
                "assistant",
                "A ZZ plant tolerates dim corners and needs water only every few weeks.",
            )
        ],
    ),
    (
        "How much did you say I should save each month for the trip?",
        [
            (
                86,
                "assistant",
                "Putting aside 350 euros a month gets you to the travel budget by June.",
            )
        ],
    ),
    (
        "What name did you come up with for the newsletter?",
        [(97, "assistant", "How about calling it The Tuesday Dispatch, since it goes out weekly?")],
    ),
    (
        "Which camera did you advise me to buy?",
        [
            (
                109,
                "assistant",
                "The Fujifilm X-T30 is light and its colours suit street photography.",
            )
        ],
    ),
    (
        "What did you say causes the sink smell?",
        [(5, "assistant", "That odour usually comes from a dry P-trap letting sewer gas back up.")],
    ),
    (
        "Which podcast did you point me to about history?",
        [
            (
                118,
                "assistant",
                "You might enjoy The Rest Is History; the episodes on Rome are great.",
            )
        ],
    ),
]

MULTI_SESSION: list[Question] = [
    (
        "How many pieces of furniture did I buy this season?",
        [
            (10, "user", "Picked up a walnut bookshelf at the flea market today."),
            (41, "user", "The new sofa got delivered, it barely fit through the door."),
            (77, "user", "Ordered a standing desk for the home office finally."),
        ],
    ),
    (
        "How many countries did I visit on work trips?",
        [
            (8, "user", "Just landed in Oslo for the client workshop."),
            (49, "user", "The Lisbon offsite went well, great team dinners."),
            (101, "user", "Back from the Warsaw conference, exhausted but happy."),
        ],
    ),
    (
        "How much have I spent on the bike repairs in total?",
        [
            (19, "user", "The shop charged 45 euros to fix the gears."),
            (55, "user", "Another 30 for a new chain and tube this week."),
            (90, "user", "Paid 80 for the wheel truing and brake pads."),
        ],
    ),
    (
        "Which musicals have I seen?",
        [
            (24, "user", "Hamilton was even better live than I expected."),
            (62, "user", "Wicked tonight, the green witch stole the show."),
            (99, "user", "Les Misérables made the whole row cry at the barricade scene."),
        ],
    ),
    (
        "How many books did I finish recently?",
        [
            (13, "user", "Just closed the last page of Piranesi, what an ending."),
            (52, "user", "Finished Klara and the Sun on the flight home."),
            (93, "user", "Got through The Overstory at last, took me months."),
        ],
    ),
    (
        "How many times did I go to the dentist?",
        [
            (17, "user", "Had a filling done this morning, my jaw is still numb."),
            (59, "user", "Cleaning appointment today, the hygienist scolded my flossing."),
            (112, "user", "Follow-up for the crown, it finally feels normal."),
        ],
    ),
    (
        "Which new recipes did I try?",
        [
            (26, "user", "Tried making shakshuka tonight, turned out great."),
            (68, "user", "Attempted pho from scratch, the broth took six hours."),
            (106, "user", "Made my first risotto, stirring for ages paid off."),
        ],
    ),
    (
        "How many races have I run?",
        [
            (33, "user", "Ran the city 10k this morning, 52 minutes."),
            (75, "user", "The trail half marathon was brutal in the mud."),
            (114, "user", "Did the charity 5k with my cousin, easy pace."),
        ],
    ),
    (
        "What gifts did I buy for Sam?",
        [
            (9, "user", "Got Sam a leather wallet for his birthday."),
            (57, "user", "Found a vintage vinyl of Rumours for Sam."),
            (100, "user", "Bought Sam some climbing chalk and a new harness."),
        ],
    ),
    (
        "How many job interviews have I done?",
        [
            (21, "user", "Interviewed with Stripe today, the system design round was tough."),
            (64, "user", "Second-round talk with a fintech startup went okay."),
            (108, "user", "Final panel at Spotify this afternoon, fingers crossed."),
        ],
    ),
    (
        "Which plants have died on me?",
        [
            (28, "user", "The basil on the windowsill shrivelled up completely."),
            (70, "user", "Lost the fiddle leaf fig, the leaves all dropped."),
            (110, "user", "My orchid rotted at the roots, overwatered it I guess."),
        ],
    ),
    (
        "How many online courses did I sign up for?",
        [
            (35, "user", "Enrolled in a Coursera class on machine learning."),
            (80, "user", "Signed up for an evening watercolour course online."),
            (117, "user", "Registered for the Udemy Kubernetes bootcamp."),
        ],
    ),
]

TEMPORAL: list[Question] = [
    (
        "Did I start climbing before or after pottery?",
        [
            (11, "user", "First pottery class today, my bowl collapsed twice."),
            (48, "user", "Signed up at the bouldering gym, my forearms are dead."),
        ],
    ),
    (
        "How many weeks passed between my job offer and my first day?",
        [
            (20, "user", "They sent the offer letter this morning, I accepted."),
            (62, "user", "First day at the new company, got my laptop and badge."),
        ],
    ),
    (
        "Which happened first, the flat flooding or the car accident?",
        [
            (34, "user", "Woke up to water all over the kitchen floor, a pipe burst."),
            (83, "user", "Someone rear-ended me at the roundabout, the bumper is ruined."),
        ],
    ),
    (
        "When did I get the flu relative to the wedding?",
        [
            (40, "user", "Stuck in bed with a fever and chills, definitely influenza."),
            (54, "user", "My cousin's wedding was beautiful, we danced till 2am."),
        ],
    ),
    (
        "Which did I adopt first, the cat or the rabbit?",
        [
            (6, "user", "Brought the bunny home from the rescue, he's hiding under the couch."),
            (73, "user", "The kitten from the shelter is settling in nicely."),
        ],
    ),
    (
        "How long after moving did I repaint the bedroom?",
        [
            (14, "user", "Movers came today, boxes everywhere in the new place."),
            (45, "user", "Spent the weekend painting the sleeping room sage green."),
        ],
    ),
    (
        "Did the laptop break before or after the trip to Rome?",
        [
            (60, "user", "Coffee went all over the keyboard, the notebook won't boot."),
            (36, "user", "Back from the Eternal City, the Colosseum was packed."),
        ],
    ),
    (
        "What came first, the promotion or the team reorg?",
        [
            (87, "user", "My manager told me I'm now a senior engineer."),
            (66, "user", "They split our group into two squads today."),
        ],
    ),
    (
        "Which was earlier, the concert or the marathon?",
        [
            (92, "user", "Radiohead were incredible last night, front row."),
            (103, "user", "Crossed the finish line of the full 42 km, legs are jelly."),
        ],
    ),
    (
        "How many days between the passport renewal and the flight?",
        [
            (50, "user", "Submitted the form to renew my travel document."),
            (85, "user", "Boarding now, window seat, off to Canada."),
        ],
    ),
    (
        "Did I quit coffee before or after starting yoga?",
        [
            (25, "user", "Day one without espresso, headache already."),
            (69, "user", "First vinyasa session at the studio, so stiff."),
        ],
    ),
    (
        "Which came first, selling the piano or buying the drum kit?",
        [
            (78, "user", "Someone bought the upright keyboard instrument off me for 600."),
            (111, "user", "The electronic drums arrived, neighbours beware."),
        ],
    ),
]

KNOWLEDGE_UPDATE: list[Question] = [
    (
        "Who is my manager now?",
        [
            (10, "user", "My boss is Priya, she runs the platform group."),
            (80, "user", "Priya left the company; I report to Tom from now on."),
        ],
    ),
    (
        "What's my current address?",
        [
            (5, "user", "We live at 12 Harbour Road, the blue house."),
            (70, "user", "Moved into the flat at 3 Elm Court this week."),
        ],
    ),
    (
        "How many days a week do I work from home these days?",
        [
            (16, "user", "I'm remote two days each week at the moment."),
            (94, "user", "New policy: I'm home-based four days weekly now."),
        ],
    ),
    (
        "What is my personal best for the 5k?",
        [
            (23, "user", "Set a record of 24:10 on the park run today."),
            (89, "user", "Smashed my best, 22:45 on the flat course."),
        ],
    ),
    (
        "Which phone do I use?",
        [
            (31, "user", "Still on my old Pixel 6, battery is holding up."),
            (102, "user", "Switched to an iPhone 16, migrating photos took forever."),
        ],
    ),
    (
        "What's my rent?",
        [
            (12, "user", "Rent is 1,200 a month for this place."),
            (76, "user", "Landlord raised it, I now pay 1,350 monthly."),
        ],
    ),
    (
        "How much do I weigh now?",
        [
            (18, "user", "The scale said 84 kilos this morning."),
            (107, "user", "Down to 78 kilos after the running streak."),
        ],
    ),
    (
        "Which gym am I a member of?",
        [
            (27, "user", "Renewed my membership at FitHub downtown."),
            (91, "user", "Cancelled FitHub and joined the climbing centre's fitness floor."),
        ],
    ),
    (
        "What's my daughter's school?",
        [
            (8, "user", "Mia started at Oakwood Primary this autumn."),
            (84, "user", "We transferred Mia to St Brigid's after the move."),
        ],
    ),
    (
        "What is the wifi password at home?",
        [
            (29, "user", "Home network key is sunflower42 for guests."),
            (99, "user", "Changed the router passphrase to tidepool88."),
        ],
    ),
    (
        "Who is my dentist?",
        [
            (37, "user", "Dr. Hughes is my dental surgeon, very gentle."),
            (113, "user", "Found a new tooth doctor, Dr. Lindqvist, closer to work."),
        ],
    ),
    (
        "What's my salary?",
        [
            (42, "user", "My pay is 68k a year before tax."),
            (98, "user", "After the raise I'm on 75k annually."),
        ],
    ),
]

ABSTENTION: list[Question] = [
    ("What is my brother's dog called?", []),
    ("Which airline did I fly to Tokyo with?", []),
    ("What colour is my kitchen?", []),
    ("How old is my grandfather?", []),
    ("What did the plumber charge for the boiler?", []),
    ("Which university did my sister attend?", []),
    ("What is my neighbour's name?", []),
    ("Which hotel did we book in Madrid?", []),
    ("What's my car's licence plate?", []),
    ("Which vaccine did the cat get?", []),
    ("How much did the wedding dress cost?", []),
    ("What's the name of my son's football coach?", []),
]

QUESTION_TYPES: dict[str, list[Question]] = {
    "single-session-user": SINGLE_USER,
    "single-session-assistant": SINGLE_ASSISTANT,
    "multi-session": MULTI_SESSION,
    "temporal-reasoning": TEMPORAL,
    "knowledge-update": KNOWLEDGE_UPDATE,
    "abstention": ABSTENTION,
}

# Chatter on the questions' neighbouring topics, that answers none of them.
NEAR_TOPIC: list[str] = [
    "My friend's corgi keeps stealing socks from the laundry.",
    "Thinking about learning the violin one day, maybe.",
    "The blood drive is in the lobby next week.",
    "Saw a vintage Volvo at the car show, beautiful lines.",
    "The kids' party had a bouncy castle and way too much cake.",
    "Our neighbours are building a new garden shed.",
    "Bread prices went up again at the bakery.",
    "Watched the football highlights over breakfast.",
    "A colleague recommended a restaurant near the office.",
    "My back was sore after moving the boxes.",
    "There's a book club starting at the library.",
    "The oven makes a weird clicking sound when preheating.",
    "Some friends are hiking in the Alps this summer.",
    "Read about new visa rules for digital nomads.",
    "The office plants look a bit sad lately.",
    "Need to check the travel budget spreadsheet again.",
    "The company newsletter had a typo in the headline.",
    "My cousin bought a new lens for her camera.",
    "The bathroom fan is getting noisy.",
    "Listening to a podcast about economics on the commute.",
    "The furniture store has a sale this weekend.",
    "A coworker just came back from a conference in Berlin.",
    "The dentist's office sent a reminder postcard.",
    "Rent prices in the city keep climbing.",
]
